 17:53:29 up  1:54,  0 user,  load average: 2.08, 1.99, 1.90
