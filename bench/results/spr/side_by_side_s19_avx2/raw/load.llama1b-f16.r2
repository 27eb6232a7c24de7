 01:23:42 up  1:56,  0 user,  load average: 1.97, 1.97, 1.81
