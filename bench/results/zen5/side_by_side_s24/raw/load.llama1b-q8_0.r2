 16:21:05 up 21 min,  0 user,  load average: 2.00, 1.86, 1.39
