 23:31:48 up  1:06,  0 user,  load average: 2.09, 1.99, 1.75
