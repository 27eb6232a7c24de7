 13:20:17 up  1:23,  0 user,  load average: 2.04, 1.98, 1.99
