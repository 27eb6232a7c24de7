 19:46:43 up  3:47,  0 user,  load average: 1.98, 1.76, 1.51
