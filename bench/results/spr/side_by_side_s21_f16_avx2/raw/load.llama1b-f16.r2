 06:45:13 up  7:18,  0 user,  load average: 1.99, 1.95, 1.67
