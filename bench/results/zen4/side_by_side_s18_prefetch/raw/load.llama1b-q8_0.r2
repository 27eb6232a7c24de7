 21:36:15 up  1:10,  0 user,  load average: 1.95, 1.89, 1.75
