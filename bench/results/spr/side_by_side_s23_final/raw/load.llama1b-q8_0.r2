 14:38:46 up 15:11,  0 user,  load average: 2.00, 1.63, 1.53
