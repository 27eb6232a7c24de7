 20:01:49 up  4:02,  0 user,  load average: 1.36, 1.74, 1.70
