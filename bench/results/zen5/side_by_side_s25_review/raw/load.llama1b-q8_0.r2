 22:04:35 up  6:05,  0 user,  load average: 2.00, 1.79, 1.33
