 04:44:01 up  5:17,  0 user,  load average: 2.00, 1.91, 1.60
