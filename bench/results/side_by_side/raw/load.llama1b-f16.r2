 03:35:47 up  5:19,  0 user,  load average: 2.03, 2.00, 2.31
