 23:59:34 up 32 min,  0 user,  load average: 2.00, 1.90, 1.56
