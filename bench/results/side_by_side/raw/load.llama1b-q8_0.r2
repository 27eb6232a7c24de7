 03:32:40 up  5:16,  0 user,  load average: 1.97, 1.99, 2.39
