 12:31:07 up 59 min,  0 user,  load average: 2.01, 1.90, 1.86
