 10:32:00 up 11:05,  0 user,  load average: 1.94, 1.61, 0.98
