 17:49:55 up  1:50,  0 user,  load average: 1.97, 1.90, 1.85
