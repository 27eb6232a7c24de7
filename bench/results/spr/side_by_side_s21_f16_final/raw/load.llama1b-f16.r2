 06:02:19 up  6:35,  0 user,  load average: 1.97, 1.68, 1.45
