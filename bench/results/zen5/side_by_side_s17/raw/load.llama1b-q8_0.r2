 18:34:07 up 58 min,  0 user,  load average: 1.87, 1.91, 1.74
