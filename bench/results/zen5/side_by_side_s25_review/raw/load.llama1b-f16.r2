 22:06:34 up  6:07,  0 user,  load average: 1.93, 1.84, 1.40
