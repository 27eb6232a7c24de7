 15:22:05 up 15:55,  0 user,  load average: 1.96, 1.82, 1.52
