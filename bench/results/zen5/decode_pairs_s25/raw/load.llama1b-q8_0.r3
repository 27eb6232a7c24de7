 19:10:31 up  3:11,  0 user,  load average: 1.18, 0.86, 1.04
