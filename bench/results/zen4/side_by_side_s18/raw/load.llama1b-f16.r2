 20:58:50 up 33 min,  0 user,  load average: 2.05, 1.99, 1.68
