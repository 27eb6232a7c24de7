 00:02:10 up 35 min,  0 user,  load average: 1.96, 1.93, 1.63
