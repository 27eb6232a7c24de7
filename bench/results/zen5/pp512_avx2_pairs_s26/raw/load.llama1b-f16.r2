 23:35:45 up  1:10,  0 user,  load average: 1.27, 1.69, 1.70
