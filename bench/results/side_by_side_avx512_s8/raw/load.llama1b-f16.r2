 12:36:20 up  1:04,  0 user,  load average: 1.93, 1.92, 1.89
