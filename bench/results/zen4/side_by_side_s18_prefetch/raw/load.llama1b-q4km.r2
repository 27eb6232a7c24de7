 21:33:38 up  1:08,  0 user,  load average: 1.96, 1.87, 1.71
