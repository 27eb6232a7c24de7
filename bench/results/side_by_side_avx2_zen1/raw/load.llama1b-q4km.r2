 02:18:05 up 58 min,  0 user,  load average: 2.03, 2.01, 1.95
