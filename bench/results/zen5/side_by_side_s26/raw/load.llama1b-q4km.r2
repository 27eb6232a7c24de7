 23:27:48 up  1:02,  0 user,  load average: 2.05, 1.90, 1.65
