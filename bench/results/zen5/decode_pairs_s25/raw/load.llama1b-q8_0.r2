 19:10:04 up  3:10,  0 user,  load average: 0.98, 0.79, 1.03
