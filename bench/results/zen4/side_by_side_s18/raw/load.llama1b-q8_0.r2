 20:55:41 up 30 min,  0 user,  load average: 1.99, 1.93, 1.60
