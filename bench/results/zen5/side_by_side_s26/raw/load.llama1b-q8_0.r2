 23:29:38 up  1:04,  0 user,  load average: 1.94, 1.91, 1.68
