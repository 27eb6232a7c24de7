 19:10:25 up  3:11,  0 user,  load average: 1.20, 0.86, 1.04
