 16:22:47 up 23 min,  0 user,  load average: 1.99, 1.90, 1.46
