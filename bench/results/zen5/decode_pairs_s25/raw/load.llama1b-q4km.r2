 19:09:59 up  3:10,  0 user,  load average: 0.80, 0.76, 1.02
