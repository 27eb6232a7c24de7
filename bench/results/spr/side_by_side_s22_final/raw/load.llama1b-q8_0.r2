 12:08:41 up 12:41,  0 user,  load average: 2.00, 1.86, 1.53
