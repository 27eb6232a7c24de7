 19:46:54 up  2:11,  0 user,  load average: 1.91, 1.89, 1.56
