 02:40:29 up  1:21,  0 user,  load average: 2.00, 1.99, 2.00
