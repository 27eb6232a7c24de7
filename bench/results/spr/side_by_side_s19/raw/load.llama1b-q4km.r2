 23:57:10 up 30 min,  0 user,  load average: 2.01, 1.83, 1.47
