 03:42:32 up  4:15,  0 user,  load average: 1.92, 1.96, 1.89
