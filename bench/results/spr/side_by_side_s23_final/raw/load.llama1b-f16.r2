 14:41:22 up 15:14,  0 user,  load average: 1.96, 1.77, 1.60
