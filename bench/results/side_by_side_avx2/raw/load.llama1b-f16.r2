 13:31:27 up  1:34,  0 user,  load average: 1.99, 1.98, 2.00
