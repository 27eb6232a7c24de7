 17:33:41 up  1:34,  0 user,  load average: 2.00, 1.99, 1.87
