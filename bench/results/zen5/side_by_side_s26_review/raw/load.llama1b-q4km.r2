 00:08:52 up  1:43,  0 user,  load average: 2.03, 1.73, 1.48
