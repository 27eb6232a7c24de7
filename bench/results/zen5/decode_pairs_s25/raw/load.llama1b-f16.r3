 19:10:39 up  3:11,  0 user,  load average: 1.31, 0.90, 1.05
