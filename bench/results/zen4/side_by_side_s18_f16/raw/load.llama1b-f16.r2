 21:58:56 up  1:33,  0 user,  load average: 1.95, 1.75, 1.69
