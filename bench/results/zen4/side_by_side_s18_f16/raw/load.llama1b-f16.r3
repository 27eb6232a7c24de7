 22:02:20 up  1:36,  0 user,  load average: 2.02, 1.90, 1.77
