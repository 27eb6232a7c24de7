 03:45:03 up  4:18,  0 user,  load average: 2.04, 1.99, 1.91
