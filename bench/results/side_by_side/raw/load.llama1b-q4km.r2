 03:30:01 up  5:13,  0 user,  load average: 2.00, 1.97, 2.47
