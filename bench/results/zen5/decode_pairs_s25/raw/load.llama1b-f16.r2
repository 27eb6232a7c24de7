 19:10:11 up  3:10,  0 user,  load average: 1.06, 0.81, 1.03
