 21:38:47 up  1:13,  0 user,  load average: 1.92, 1.91, 1.78
