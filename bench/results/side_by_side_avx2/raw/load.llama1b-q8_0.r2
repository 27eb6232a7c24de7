 13:25:23 up  1:28,  0 user,  load average: 2.01, 2.01, 2.00
