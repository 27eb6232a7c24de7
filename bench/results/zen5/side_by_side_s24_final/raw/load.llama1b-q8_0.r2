 17:51:36 up  1:52,  0 user,  load average: 2.01, 1.95, 1.87
