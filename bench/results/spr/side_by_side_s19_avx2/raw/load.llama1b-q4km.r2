 01:17:37 up  1:50,  0 user,  load average: 2.06, 1.92, 1.71
