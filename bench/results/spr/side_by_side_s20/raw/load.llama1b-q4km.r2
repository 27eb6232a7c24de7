 03:40:21 up  4:13,  0 user,  load average: 2.05, 1.97, 1.87
