 12:33:31 up  1:01,  0 user,  load average: 1.92, 1.91, 1.87
