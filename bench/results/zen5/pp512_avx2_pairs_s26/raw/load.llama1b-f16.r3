 23:36:06 up  1:10,  0 user,  load average: 1.47, 1.71, 1.70
