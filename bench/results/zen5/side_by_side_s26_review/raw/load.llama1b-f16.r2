 00:12:58 up  1:47,  0 user,  load average: 1.97, 1.88, 1.61
