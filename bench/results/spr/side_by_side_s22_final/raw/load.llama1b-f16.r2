 12:11:12 up 12:44,  0 user,  load average: 1.98, 1.91, 1.60
