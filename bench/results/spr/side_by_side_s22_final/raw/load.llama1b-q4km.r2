 12:06:27 up 12:39,  0 user,  load average: 2.02, 1.78, 1.45
