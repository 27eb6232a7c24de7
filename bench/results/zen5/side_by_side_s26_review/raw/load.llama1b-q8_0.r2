 00:10:49 up  1:45,  0 user,  load average: 2.05, 1.85, 1.56
